"""Renderers: rich tables for terminals, markdown for PR comments, JSON is Report.to_json."""
