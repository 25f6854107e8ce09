"""The example that `cellmate demo` (and `make run`) sends through a fresh sandbox."""

DEMO_CODE = """\
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

months = pd.period_range("2025-01", periods=12, freq="M")
revenue = pd.Series(np.round(100 + 8 * np.arange(12) + 10 * np.sin(np.arange(12)), 1), index=months)
table = pd.DataFrame({"revenue": revenue, "growth %": (revenue.pct_change() * 100).round(1)})
print(table.to_string())

fig, ax = plt.subplots()
revenue.plot(ax=ax, marker="o", title="Revenue by month")
ax.set_ylabel("k€")
plt.show()

table.to_csv("/mnt/data/revenue.csv")
print("Saved /mnt/data/revenue.csv")
"""
