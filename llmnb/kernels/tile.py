"""The tile: 64 outputs, the unit of every repacked layout (``layout.py``) and of the float
kernels' loops (``matvec.py``, ``dense.py``, ``floats.py``); a module of its own so that the
kernels, which ``layout.py`` loads on first use, need not import it."""
TILE = 64
