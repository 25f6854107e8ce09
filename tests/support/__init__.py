"""What several test modules share: sample data, stand-in wiring and fixtures."""
