"""The learned drafters, Medusa heads and the EAGLE-style feature drafter, as one unit:
weights (`weights`, `eagle`), their training (`medusa_train`, `eagle_train`), the rows
they learn from (`data`, `prompts`), `specli heads train` (`training`), online learning in
serve (`online`), `specli heads eval` (`evaluate`), the pair loaded for a runtime
(`loaded`), the files (`store`) and BLAS threads (`blas`). The drafters themselves are
specli.drafters.heads."""
