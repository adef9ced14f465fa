"""Learned drafters' weights: Medusa heads over the target's hidden states (`weights`),
how they are trained (`train`), the prompts the target answers to make training text
(`prompts`) and where trained heads are kept (`store`). Pure numpy: the rows come from
runtime.heads_data, the drafter is drafters.medusa."""
