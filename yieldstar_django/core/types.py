"""Primitive types shared by the core modules."""

from __future__ import annotations

from typing import TypeAlias

PathSegment: TypeAlias = str | int
StorePath: TypeAlias = tuple[PathSegment, ...]
StoreVersion: TypeAlias = int

__all__ = ["PathSegment", "StorePath", "StoreVersion"]
