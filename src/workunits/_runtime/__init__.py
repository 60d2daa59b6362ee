"""The child side: what runs inside a unit process (context, channel, transcript)."""
