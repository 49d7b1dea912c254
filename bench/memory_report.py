#!/usr/bin/env python3
"""Measured against predicted memory, over every run under a directory: each run's
summary.json holds its peak resident set, the memory plan's predicted peak and (out of core)
the budget. Prints the spread of measured/predicted, the largest peak/budget, and every run
whose peak is more than 15% off its prediction.

  /usr/bin/python3 bench/memory_report.py DIR   (e.g. pytest's --basetemp of the e2e suites)
"""
import glob
import json
import math
import sys

rows=[]
for f in glob.glob(sys.argv[1]+'/**/summary.json',recursive=True):
    s=json.load(open(f))
    p=s.get('predicted_peak_bytes',0); r=s['peak_rss_bytes']; b=s.get('memory',{}).get('budget_bytes',0)
    rows.append((r/p if p else float('nan'), r/b if b else float('nan'), s['memory'].get('mode'), f))
ok=[r for r in rows if not math.isnan(r[0])]
print('runs %d, with a prediction %d; measured/predicted min %.3f median %.3f max %.3f' % (len(rows), len(ok), min(r[0] for r in ok), sorted(r[0] for r in ok)[len(ok)//2], max(r[0] for r in ok)))
bud=[r for r in rows if not math.isnan(r[1])]
print('out of core runs %d: peak/budget max %s' % (len(bud), '%.3f' % max(r[1] for r in bud) if bud else '-'))
for r in rows:
    if not math.isnan(r[0]) and abs(r[0]-1)>0.15: print('outside 15%%: %.3f %s %s' % (r[0], r[2], r[3]))
