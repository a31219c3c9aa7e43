"""Reporting: tables and plots from the records. The report of a folder, paired statistics, the paper table, ablations, star designs, shift tables."""
