"""LLM spend: metering every call and the token budgets."""
