"""Math primitives. Each op folder holds an obvious reference (naive.py) beside its fast paths."""
