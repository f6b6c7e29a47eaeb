"""Root conftest: wires the suite's shared fixtures (the plugin itself loads through its entry point)."""

pytest_plugins = ["fixtures.models", "fixtures.backends"]
