"""Text utilities: token counting and document segmentation."""
