"""AWS Lambda functions: one package per function (handler, settings, logic, adapters)."""
