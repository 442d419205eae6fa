"""CLI command groups. Each module exposes ``register(app)``; only CLI code prints or exits."""
