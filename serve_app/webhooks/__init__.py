"""Webhook delivery of the event outbox: SSRF guard, signed sender, dispatcher loop."""
