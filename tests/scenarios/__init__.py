"""Scenarios on real topologies: Cluster, reshards, Sentinel, replicas, faults, Prometheus
scraping, the evidence through outages, both servers side by side."""
