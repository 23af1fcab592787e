"""Performance: benchmark runner (``llmnb bench``); the machine probe and roofline build on it."""
