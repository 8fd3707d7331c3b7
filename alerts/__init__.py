"""Alert rules, lifecycle, signed webhooks and retrain triggers (next milestone)."""
