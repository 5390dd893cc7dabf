"""Artifacts as the entry points see them: the artifact rules over the stored rows (`ArtifactStore`: a job's
artifacts in stream order, the effective artifact of a type, one artifact), the same rules the artifact consumer
writes by (`projections/artifact_store.py`)."""

from __future__ import annotations

from settlekit.projections.artifact_store import ArtifactStore

__all__ = ["ArtifactStore"]
