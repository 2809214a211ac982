"""Where case code runs: the loader process, the worker pool, the worker and the process forked for each case, their
channel, process trees and the residue check.
"""
