"""The checks of the labs, one module per interview question (``m044.py`` holds every ``m044_main_*`` and
``m044_follow_*`` check), and :mod:`.common`, the vocabulary they share."""
