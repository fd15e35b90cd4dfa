"""What users run: the command line, the model JSON, the report and the demo."""
