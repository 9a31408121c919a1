"""The ``llm`` and ``llm8b`` benchmark cases (issue 23): :mod:`.case` runs each contender
in a fresh process (:mod:`.child`), :mod:`.table` writes the Markdown."""
