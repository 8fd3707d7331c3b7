"""Alert rules, lifecycle, silences, signed webhooks (outbox), retrain triggers, the Alertmanager receiver."""
