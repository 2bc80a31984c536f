"""Pictures of schedules: text (here, no dependencies); images and traces import their own."""
