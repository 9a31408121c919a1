"""The ``llm`` and ``llm8b`` cases (issue 23): what does a language model's trainable subset
cost in bayesflow, against a plain torch + peft loop and against posteriors?

:mod:`.case` runs each contender in a fresh process (:mod:`.child`): the peak memory and the
optimiser step of whole contenders, and (:mod:`.gradient`, also a command of its own) the
bytes the problem adds and the time of one gradient; :mod:`.table` writes the Markdown."""
