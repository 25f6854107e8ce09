"""Shared fixtures. Integration tests need a Docker engine and the sandbox image: `make test`
starts the engine and builds the image first. A missing engine or image fails those tests;
it never skips them."""
