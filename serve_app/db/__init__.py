"""PostgreSQL access: embedded server, connection pool, migrations."""
