"""EvidenceBench construction: harvest, refine, decompose, align, select and evaluate."""
