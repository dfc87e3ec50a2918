"""Building the container image (`make image`): a tool, not part of the product or its image."""
