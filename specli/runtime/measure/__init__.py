"""What this machine costs, measured: below the loaded pair, which prices drafts with it.

- calibration: the target's and draft's step and batch costs and numerics, measured once and cached
- first_use: a first run's calibration in seconds, only what the run needs, said out loud
- load: is the machine busy with something else while specli measures
"""
