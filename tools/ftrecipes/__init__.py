"""ftrecipes: versioned fine-tuning recipes, their renderer, a config linter and a memory model."""

__version__ = "0.1.0"
