import { Column, CreateDateColumn, Entity, PrimaryColumn } from 'typeorm';

/** The table is created by `CreateOrders1764547200000`, not by `synchronize`. */
@Entity({ name: 'orders' })
export class Order {
  @PrimaryColumn({ type: 'uuid' })
  id!: string;

  @Column({ type: 'varchar', length: 200 })
  customer!: string;

  /** In cents, to keep money out of floating point. */
  @Column({ type: 'integer' })
  amount!: number;

  @CreateDateColumn({ name: 'created_at' })
  createdAt!: Date;
}
