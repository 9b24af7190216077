"""Search backends behind one port: Elasticsearch (production) and an embedded tantivy + numpy engine."""
