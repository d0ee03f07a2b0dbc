"""The model runner: one scheduled step on the platform (packed inputs, forward pass, sampling), the
step features that extend it (:mod:`.features`), device graphs, and the shard every rank builds."""
