"""The ``trunk`` case (issue 31, item 4): what does computing a language model's frozen trunk
once for every chain and member buy, on SmolLM2-135M's shape?

:mod:`.case` runs each contender in a fresh process (:mod:`.child`: one chain, K chains on the
shared trunk, K chains on the whole forward, K members one after another; and the statement
scoring), reusing the ``llm`` case's model builder and bayesflow step
(:mod:`benchmarks.speed.llm.child`); :mod:`.table` writes the Markdown."""
