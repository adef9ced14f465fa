"""The learned drafters as one unit: Medusa heads and the EAGLE-style feature drafter,
both read the target's own hidden states and are trained here, on the user's machine.

The pure-numpy core (imports nothing of specli outside it; tests/test_layout.py):
- `weights`: Medusa heads (MedusaHeads), SiLU, the reduced vocabulary, the lm_head fit;
- `eagle`: the feature drafter (EagleHead);
- `rows`: rows and documents, the held-out rule, labels, Acceptance;
- `kernel`: the training kernel both share (Adam over named parameters, cross-entropy, dsilu);
- `medusa_train`, `eagle_train`: each drafter's gradients, epochs and held-out evaluation;
- `blas`: numpy's BLAS held to one thread beside llama.cpp;
- `prompts`: the prompts the target answers to make training text.
Beside it, by lifecycle:
- `data`: rows from the target (history store, files, its own answers), on disk a document at a time;
- `training`: `specli heads train` (the recipe, checked before any work, then each phase resumable);
- `store`: the on-disk contract (files, recipe.json written and read, optimiser states);
- `loaded`: the pair loaded for a runtime, timed here, making the drafters;
- `online`: serve --heads-learn, rounds of training on served answers;
- `evaluate`: `specli heads eval`.
Elsewhere: the drafters (specli.drafters.heads: MedusaDrafter, EagleDrafter), the target's
hidden states (specli.backend.features), the command (specli.cli.heads). Dependencies run
runtime -> heads -> (drafters, engine, backend, history); drafters never import heads.
"""
