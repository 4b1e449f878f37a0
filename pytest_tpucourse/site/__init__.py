"""The course site (`tpucourse site`): the stack, a page per chapter, the bench and the six instruments,
as plain HTML, CSS and JavaScript built from the learner's state and records and the package's own code."""
