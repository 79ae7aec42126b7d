"""From corpus files to document trees: parsing (text/), captions, the tree (tree/)."""
