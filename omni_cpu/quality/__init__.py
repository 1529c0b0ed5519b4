"""How far a quantized weight format moves the audio: figures against the talker's own dtype.

`figures` holds the arithmetic (pure torch), `check_weights` runs the talker in each
format through omni_cpu.platform.inprocess, `plot` draws the per-frame figures.
"""
