"""The pytest suite: the matrix, the model registry, the plugin and its parts."""
