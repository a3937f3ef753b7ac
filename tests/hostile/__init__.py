"""The hostile-input suite: cases, generators and a harness that runs the real CLI (issue 9)."""
