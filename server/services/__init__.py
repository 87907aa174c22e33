"""Transport-free services: all rules live here, servicers only convert."""
