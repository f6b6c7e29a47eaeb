"""Results: the typed record of one cell, and reading/writing results files."""
