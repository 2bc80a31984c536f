"""Planning a real training run: costs in seconds, memory in bytes, from a model description
or a measurement; the best schedule that fits, exported for torchtitan."""
