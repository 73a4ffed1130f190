"""The runs behind the docs pages: ``experiments/<page>/`` holds the scripts whose stored runs docs/<page>.md cites."""
