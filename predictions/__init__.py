"""The prediction log: every served prediction, its inputs and flags, and ground-truth feedback."""
