"""The user profile of a context block: classes given at write time."""

from serve_app.profile.classify import CLASSES, PRIORITY, ProfileClassifier, classify, cue_hits

__all__ = ["CLASSES", "PRIORITY", "ProfileClassifier", "classify", "cue_hits"]
