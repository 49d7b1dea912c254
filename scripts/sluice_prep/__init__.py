"""sluice preprocessing: raw data into the on-disk dataset format (docs/format.md)."""
FORMAT_NAME = "sluice-dataset"
FORMAT_VERSION = 1
