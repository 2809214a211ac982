"""Judging values: the tolerance table, the comparison of one output, a run's results and the judge that compares them
where no case code runs.
"""
