"""Your application: the agents the Lambda functions run (``myapp.agents:agents``)."""
