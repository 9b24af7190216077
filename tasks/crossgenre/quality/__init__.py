"""``irforge quality crossgenre``: the page stages scored on a labelled folder of real pages."""
