"""The knowledge base's document handling: parsing (parse.py), chunking (chunking.py)
and URL fetches (fetch.py), plain functions the documents service runs off the event loop."""
