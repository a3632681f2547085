"""What the released kit needs: the student's decoder assembled from notebook cells, the check cells' self-check, the hand-in."""
