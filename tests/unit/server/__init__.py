"""The server wing: topology, Cluster nodes, TLS and the ACL user."""
