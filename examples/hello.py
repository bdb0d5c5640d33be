# A plain script on Pyodide (CPython on WebAssembly): its output and exit
# code are the result.
import sys

print("hello from a jailed Python", sys.version.split()[0])
