"""Speech in and out: what to say and how, reference audio, talker prompts, WAV files.

`codec` (the codec's sample rate and frame size, a leaf), `request` (texts, task
type and voice checked against the model's config), `ref_audio` (reference audio
for cloning), `prompts` (talker prompts sized as vLLM-Omni sizes them, checked
against the context before any engine starts) and `wav` (output never left
half-written). Used by run, serve, bench and check-weights; no torch at import.
"""
