import NIOSSL
public enum P2 {}
