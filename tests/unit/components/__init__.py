"""Component tests under Pulumi mocks."""
